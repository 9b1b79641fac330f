/* Page map entries and the slot allocator (slot_allocator.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "page_map.h"
#include "slot_allocator.h"

static void test_entry_encoding_round_trips(void **state)
{
  (void)state;
  assert_int_equal(page_entry_kind(0), PAGE_ZERO);
  uint64_t groups[] = { 0, 1, 12345, PAGE_ENTRY_MAX_GROUP };
  for (unsigned g = 0; g < 4; g++)
    for (unsigned m = 0; m < 256; m += 85) {
      page_entry e = page_entry_remote(groups[g], m);
      assert_int_equal(page_entry_kind(e), PAGE_REMOTE);
      assert_true(page_entry_group(e) == groups[g]);
      assert_int_equal(page_entry_member(e), m);
      assert_true(e != 0);
    }
  page_entry s = page_entry_slot(PAGE_SPILL, PAGE_ENTRY_MAX_SLOT);
  assert_int_equal(page_entry_kind(s), PAGE_SPILL);
  assert_true(page_entry_slot_of(s) == PAGE_ENTRY_MAX_SLOT);
  page_entry l = page_entry_slot(PAGE_LOCAL, 0);
  assert_int_equal(page_entry_kind(l), PAGE_LOCAL);
  assert_true(l != 0);
}

static void test_map_set_returns_previous(void **state)
{
  (void)state;
  struct page_map map;
  assert_int_equal(page_map_init(&map, 1u << 20), 0);
  assert_true(page_map_memory_bytes(&map) == 8u << 20);
  assert_true(page_map_get(&map, 999999) == 0);
  assert_true(page_map_set(&map, 999999, page_entry_remote(4, 2)) == 0);
  assert_true(map.count[PAGE_REMOTE] == 1 && map.count[PAGE_ZERO] == (1u << 20) - 1);
  assert_true(page_map_set(&map, 999999, 0) == page_entry_remote(4, 2));
  assert_true(map.count[PAGE_REMOTE] == 0 && map.count[PAGE_ZERO] == 1u << 20);
  page_map_destroy(&map);
}

static void test_slot_allocator(void **state)
{
  (void)state;
  struct slot_allocator a;
  assert_int_equal(slot_allocator_init(&a, 3), 0);
  assert_int_equal(slot_allocator_alloc(&a), 0);
  assert_int_equal(slot_allocator_alloc(&a), 1);
  assert_int_equal(slot_allocator_alloc(&a), 2);
  assert_int_equal(slot_allocator_alloc(&a), -1);
  assert_int_equal(slot_allocator_available(&a), 0);
  slot_allocator_release(&a, 1);
  assert_int_equal(slot_allocator_available(&a), 1);
  assert_int_equal(slot_allocator_alloc(&a), 1);
  assert_int_equal(slot_allocator_grow(&a, 5), 0);
  assert_int_equal(slot_allocator_alloc(&a), 3);
  assert_int_equal(slot_allocator_alloc(&a), 4);
  assert_int_equal(slot_allocator_alloc(&a), -1);
  for (uint32_t i = 0; i < 5; i++)
    assert_int_equal(slot_allocator_release(&a, i), 0);
  assert_int_equal(slot_allocator_available(&a), 5);
  /* A slot not in use, or past capacity, is refused rather than freed twice. */
  assert_int_equal(slot_allocator_release(&a, 2), -1);
  assert_int_equal(slot_allocator_release(&a, 5), -1);
  assert_int_equal(slot_allocator_available(&a), 5);
  slot_allocator_destroy(&a);
}

/* Against a plain array of flags: random allocs, frees, claims and grows over capacities
 * that are and are not multiples of 64 and cross summary words (4096 slots), then a
 * rebuild from the bitmap a predecessor left. Every slot handed out is free and below
 * capacity, every free slot is found before -1, and the counts agree. */
static void test_slot_allocator_against_flags(void **state)
{
  (void)state;
  enum { MAX = 9000 };
  static unsigned char flag[MAX];
  memset(flag, 0, sizeof flag);
  struct slot_allocator a;
  uint64_t capacity = 77, in_use = 0;
  assert_int_equal(slot_allocator_init(&a, capacity), 0);
  uint64_t seed = 42;
  for (unsigned step = 0; step < 200000; step++) {
    seed = seed * 6364136223846793005u + 1442695040888963407u;
    unsigned r = (unsigned)(seed >> 33);
    if (r % 1000 == 0 && capacity < MAX - 1000) {
      capacity += 1 + r % 997;
      assert_int_equal(slot_allocator_grow(&a, capacity), 0);
    } else if (r % 3 == 0) {
      int64_t slot = slot_allocator_alloc(&a);
      if (in_use == capacity) {
        assert_int_equal(slot, -1);
        continue;
      }
      assert_true(slot >= 0 && (uint64_t)slot < capacity);
      assert_int_equal(flag[slot], 0);
      flag[slot] = 1;
      in_use++;
    } else if (r % 3 == 1) {
      uint64_t slot = (r / 3) % capacity;
      assert_int_equal(slot_allocator_release(&a, slot), flag[slot] ? 0 : -1);
      in_use -= flag[slot];
      flag[slot] = 0;
    } else {
      uint64_t slot = (r / 3) % capacity;
      assert_int_equal(slot_allocator_claim(&a, slot), 0);
      in_use += !flag[slot];
      flag[slot] = 1;
    }
    assert_true(a.in_use == in_use);
    assert_true(slot_allocator_available(&a) == capacity - in_use);
  }
  /* A restarted pager: the same slots in use, from a bitmap of them. */
  static uint64_t used[MAX / 64 + 1];
  memset(used, 0, sizeof used);
  for (uint64_t i = 0; i < capacity; i++)
    if (flag[i])
      used[i / 64] |= UINT64_C(1) << (i % 64);
  struct slot_allocator b;
  assert_int_equal(slot_allocator_init(&b, capacity), 0);
  slot_allocator_rebuild(&b, used);
  assert_true(b.in_use == in_use);
  for (uint64_t i = 0; i < capacity; i++)
    assert_int_equal(slot_allocator_is_used(&b, i), flag[i]);
  /* Every free slot is found, then -1. */
  for (uint64_t n = in_use; n < capacity; n++) {
    int64_t slot = slot_allocator_alloc(&b);
    assert_true(slot >= 0 && (uint64_t)slot < capacity && !flag[slot]);
    flag[slot] = 1;
  }
  assert_int_equal(slot_allocator_alloc(&b), -1);
  assert_true(slot_allocator_bytes(&b) < capacity / 8 + 64);
  slot_allocator_destroy(&b);
  slot_allocator_destroy(&a);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_entry_encoding_round_trips),
    cmocka_unit_test(test_map_set_returns_previous),
    cmocka_unit_test(test_slot_allocator),
    cmocka_unit_test(test_slot_allocator_against_flags),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
