/* Page map entries and the slot allocator. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

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
    slot_allocator_release(&a, i);
  assert_int_equal(slot_allocator_available(&a), 5);
  slot_allocator_destroy(&a);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_entry_encoding_round_trips),
    cmocka_unit_test(test_map_set_returns_previous),
    cmocka_unit_test(test_slot_allocator),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
